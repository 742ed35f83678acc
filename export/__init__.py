"""Exporters from torch to deployable formats. Imports `runtimes` at most."""
