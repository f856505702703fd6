"""Errors a user can act on. The CLI prints these as one line, never as a traceback."""


class AdaptiveRagError(Exception):
    """Base class: anything raised as this is reported to the user as `error: <message>`."""


class ConfigError(AdaptiveRagError):
    """A params.yaml key is missing, misspelt or has a bad value; the message names the key."""


class InputError(AdaptiveRagError):
    """An input file is missing or malformed; the message names the file (and line/record)."""


class StorageError(AdaptiveRagError):
    """A file could not be written (a full disk, a read-only or unwritable directory, a directory where
    a file is to be written); the message names the path and says that a rerun resumes."""
