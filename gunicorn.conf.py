"""gunicorn settings for production: `gunicorn -c gunicorn.conf.py yuxi_site.asgi`
(scripts/serve-production runs it). Every value can be changed from the environment."""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
# Several processes, each one uvicorn event loop (yuxi_site.asgi): a chat turn mostly waits on
# the model, and an open stream (/api/chat/stream/) waits there without holding a thread; the
# turns' database work runs on each process's worker threads, bounded by its connection pool.
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
worker_class = "uvicorn_worker.UvicornWorker"
# A worker whose event loop does not report back within this many seconds is restarted; a
# chat turn waiting on the model never blocks the loop, so this is only a stuck worker's bound.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "300"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
# Seconds an idle client connection stays open for its next request. Behind a proxy or load
# balancer that reuses its upstream connections, this must be longer than the proxy's own
# idle timeout: a request the proxy sends on a connection gunicorn is closing is reset, and a
# POST cannot be retried (docs/operations.md).
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# Request lines and headers are bounded by uvicorn's own HTTP parser (gunicorn's
# limit_request_* settings apply to its sync parser only).
# No management socket in the home directory: several instances may share a host, and the
# process manager (systemd, a container runtime) already controls the master by signals.
control_socket_disable = True
