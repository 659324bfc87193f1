"""ASGI entry point: production serving (gunicorn with uvicorn workers, gunicorn.conf.py).

Under ASGI an open `/api/chat/stream/` holds no thread while the model thinks: the turn runs
on the worker's event loop, its database work on worker threads. The worker is warmed before
it serves (`yuxi_site.warmup`): nothing of the URLconf's imports blocks its loop later. Under a
burst of streamed chats, a few are opened at a time, in arrival order
(`memory_app.admission.StreamAdmission`), so the first reach the model first.
"""

import os

from django.core.asgi import get_asgi_application

from memory_app.admission import StreamAdmission
from yuxi_site.warmup import warm_up

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")

django_application = get_asgi_application()

application = StreamAdmission(django_application)
# Before the server accepts a connection: /healthz answers only once this is done.
warm_up()
