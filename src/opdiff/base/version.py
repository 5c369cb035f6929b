"""The package version, in the base layer so every stage (and the writer's meta) can name it."""

__version__ = "0.1.0"
