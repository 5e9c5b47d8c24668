"""Bounded fuzzing of RunFunction in CI (derandomized, so CI is reproducible);
`make fuzz` explores 100,000+ fresh cases."""

from __future__ import annotations

import os

from fuzz import check, requests
from hypothesis import HealthCheck, given, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests())
def test_run_function_answers_fatal_or_valid_objects_for_any_request(req):
    check(req)
