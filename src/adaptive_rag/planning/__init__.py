"""What a profile's suite costs before it runs (`adaptive-rag plan`): its jobs (`jobs`), each method's
work per question read off measured runs' traces (`counts`), the device's measured cost of each unit of
work (`units`), and the projection that multiplies them (`plan`). docs/performance.md#planning-a-profile."""
