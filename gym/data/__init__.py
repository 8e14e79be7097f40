"""Data layer: loading datasets, converting row formats, chat templates and loss masks."""
