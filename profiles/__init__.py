"""Device budget profiles: budgets are data (profiles/*.yaml), checked by a pure function.

    schema.py      A profile's schema: device, runtime, export preset, budgets
    loader.py      Profiles found and loaded by name (the YAML beside this module) or path
    yamlread.py    A YAML file a person wrote, read safely and strictly (line numbers kept)
    validation.py  pydantic's errors in the words of the file a person wrote
    providers.py   The onnxruntime execution providers a profile can ask for, their options
    check.py       `check(measurement, profile) -> [Verdict]`: pure, table-driven
"""
from profiles.check import (AT_LEAST, FAIL, MEMORY_FIT, NO_METER, OFF_TARGET, PASS, UNITS,
                            UNMEASURED, Verdict, budget_limits, check, on_target, unmeasured_language_verdicts,
                            unmeasured_verdicts)
from profiles.loader import ProfileError, list_profiles, load_profile
from profiles.schema import Profile

__all__ = ["Profile", "Verdict", "check", "on_target", "unmeasured_verdicts",
           "unmeasured_language_verdicts", "load_profile", "list_profiles",
           "ProfileError", "PASS", "FAIL", "UNMEASURED", "OFF_TARGET", "NO_METER", "UNITS",
           "AT_LEAST", "MEMORY_FIT", "budget_limits"]
