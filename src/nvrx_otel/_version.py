"""The package version, read by the build backend and by ``nvrx-otel --version``."""

__version__ = "0.1.0"
