"""Device budget profiles: budgets are data (profiles/*.yaml), checked by a pure function."""
from profiles.check import (FAIL, NO_METER, OFF_TARGET, PASS, UNITS, UNMEASURED, Verdict,
                            check, on_target, unmeasured_verdicts)
from profiles.loader import ProfileError, list_profiles, load_profile
from profiles.schema import Profile

__all__ = ["Profile", "Verdict", "check", "on_target", "unmeasured_verdicts", "load_profile",
           "list_profiles",
           "ProfileError", "PASS", "FAIL", "UNMEASURED", "OFF_TARGET", "NO_METER", "UNITS"]
