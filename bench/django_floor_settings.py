"""The settings of bench/django_floor.py: the site's own (its middleware, sessions, CSRF,
authentication, database pool), with that module as the URLconf."""

from yuxi_site.settings import *  # noqa: F403 (the site's settings, whole)

ROOT_URLCONF = "django_floor"
