"""WSGI entry point (`./scripts/serve` through runserver); the process is warmed before it
serves (`yuxi_site.warmup`)."""

import os

from django.core.wsgi import get_wsgi_application

from yuxi_site.warmup import warm_up

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")

application = get_wsgi_application()
# Before the server accepts a connection: /healthz answers only once this is done.
warm_up()
