"""gunicorn settings for production: `gunicorn -c gunicorn.conf.py yuxi_site.wsgi`
(scripts/serve-production runs it). Every value can be changed from the environment."""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
# Several processes, each with a pool of threads: a chat turn mostly waits on the model.
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
# A chat turn may wait on the model for LLM_TIMEOUT_SECONDS on each of several steps.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "300"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# Request lines are capped so a client cannot make a worker buffer huge headers.
limit_request_line = 8190
# No management socket in the home directory: several instances may share a host, and the
# process manager (systemd, a container runtime) already controls the master by signals.
control_socket_disable = True
