"""ASGI entry point: production serving (gunicorn with uvicorn workers, gunicorn.conf.py).

Under ASGI an open `/api/chat/stream/` holds no thread while the model thinks: the turn runs
on the worker's event loop, its database work on worker threads. The worker is warmed before
it serves (`yuxi_site.warmup`): nothing of the URLconf's imports blocks its loop later.
"""

import os

from django.core.asgi import get_asgi_application

from yuxi_site.warmup import warm_up

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")

application = get_asgi_application()
# Before the server accepts a connection: /healthz answers only once this is done.
warm_up()
