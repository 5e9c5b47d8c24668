"""The package version, read by hatch at build time."""

__version__ = "0.1.0"
