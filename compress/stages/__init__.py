"""One module per stage type. Importing this package imports every module in it, and
each registers its stage with `@register(Config)`: a new stage is a new file here."""
import importlib
import pkgutil

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")
