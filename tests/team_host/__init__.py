"""A team's own Django project, as unlike `startproject` as a real one: an email-login user
model without username, names or is_active (`accounts`, listed after the apps), its own user
admin, its own NinjaAPI at `/api/` under the namespace `api`, bearer tokens for the memory
API. `tests/memory_app/test_team_host.py` runs `checks.py` in it; `scripts/check-install`
builds the same host from the wheel."""
