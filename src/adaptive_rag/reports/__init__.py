"""Tables and figures from score files."""
