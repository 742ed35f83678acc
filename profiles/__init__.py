"""Device budget profiles: budgets are data (profiles/*.yaml), checked by a pure function."""
from profiles.check import (AT_LEAST, FAIL, MEMORY_FIT, NO_METER, OFF_TARGET, PASS, UNITS,
                            UNMEASURED, Verdict, budget_limits, check, on_target, unmeasured_language_verdicts,
                            unmeasured_verdicts)
from profiles.loader import ProfileError, list_profiles, load_profile
from profiles.schema import Profile

__all__ = ["Profile", "Verdict", "check", "on_target", "unmeasured_verdicts",
           "unmeasured_language_verdicts", "load_profile", "list_profiles",
           "ProfileError", "PASS", "FAIL", "UNMEASURED", "OFF_TARGET", "NO_METER", "UNITS",
           "AT_LEAST", "MEMORY_FIT", "budget_limits"]
