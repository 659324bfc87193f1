"""ASGI entry point: production serving (gunicorn with uvicorn workers, gunicorn.conf.py).

Under ASGI an open `/api/chat/stream/` holds no thread while the model thinks: the turn runs
on the worker's event loop, its database work on worker threads.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")

application = get_asgi_application()
