"""Settings for the Yuxi Memory site, read from the environment (and an optional `.env`)."""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF

from conversations.utils.log_format import EVENT_LOGGER

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=False)


def _insecure_secret_key(key: str) -> bool:
    """Django's own deploy-check rule for a weak key, plus the development keys' prefixes."""
    return len(key) < 50 or len(set(key)) < 5 or key.startswith(("django-insecure-", "insecure-"))


def _generated_secret_key(path: Path) -> str:
    """A random key made once and kept (0600) in `path`, so a machine without `SECRET_KEY` (a
    fresh clone, a test run, one host) never falls back to a known key."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    except OSError as exc:
        raise environ.ImproperlyConfigured(
            f"SECRET_KEY is not set and {path} cannot be created ({exc.strerror}): set "
            "SECRET_KEY to at least 50 random characters."
        ) from exc
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


SECRET_KEY = env.str("SECRET_KEY", default="") or _generated_secret_key(
    Path(env.str("SECRET_KEY_FILE", default=str(BASE_DIR / "var" / "secret-key")))
)
if not DEBUG and _insecure_secret_key(SECRET_KEY):
    raise environ.ImproperlyConfigured(
        "SECRET_KEY is insecure and DEBUG is off: set SECRET_KEY to at least 50 random "
        "characters (python -c 'import secrets; print(secrets.token_urlsafe(50))'), or unset it "
        "to use a random key kept in SECRET_KEY_FILE (default var/secret-key)."
    )

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# HTTPS in production (all off by default so the development server and tests work over
# plain HTTP); `manage.py check --deploy` is clean once they are set.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
# A load balancer probes the health check over plain HTTP on the private network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
# Behind a TLS-terminating proxy that sets `X-Forwarded-Proto: https` (and strips it from
# clients): the request counts as HTTPS.
if env.bool("SECURE_PROXY_SSL", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    # Login throttling (its AccessAttempt records) and the Content-Security-Policy header.
    "axes",
    "csp",
    # django-ninja's own Swagger UI assets, served from our static files (no CDN).
    "ninja",
    "conversations",
    "memory_app",
    # The site's demo data (manage.py seed_demo), never part of the wheel.
    "yuxi_site.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves the static files from STATIC_ROOT (filled by `collectstatic`), in development
    # too (scripts/serve runs `runserver --nostatic`), so a static 404 gets every header.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # django-csp's policy, on error pages under DEBUG too (yuxi_site.content_security).
    "yuxi_site.content_security.PolicyOnEveryResponseMiddleware",
    # Before the session and CSRF middleware: a non-JSON body under /api/ is refused unread.
    "memory_app.api_edge.ApiEdgeMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The page's language: the one the user chose (set_language), else the browser's.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last of the working ones, as django-axes requires: it turns a locked-out login into the
    # lockout page.
    "axes.middleware.AxesMiddleware",
    # A pass-through, sync only: under ASGI the chain above runs in one thread instead of a
    # thread hop per hook (yuxi_site.middleware_chain).
    "yuxi_site.middleware_chain.OneThreadMiddlewareChain",
]

ROOT_URLCONF = "yuxi_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Site-level templates (the login pages, the lockout page).
        "DIRS": [BASE_DIR / "yuxi_site" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "yuxi_site.wsgi.application"

# PostgreSQL only: advisory locks and row locks are the point, so there is no SQLite fallback.
DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/yuxi_memory"),
}
# Django's psycopg pool: a chat holds a connection only while it talks to the database (never
# while the model thinks), so concurrent chats are bounded by this pool, not by PostgreSQL's
# max_connections. A caller waits up to `timeout` seconds for a free connection.
DATABASES["default"]["OPTIONS"] = {
    **DATABASES["default"].get("OPTIONS", {}),
    "pool": {
        # Per worker process: docs/operations.md plans them against max_connections.
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=1),
        "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=16),
        # The longest a request waits for a connection before it answers 503.
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
        # Idle connections above min_size are closed after this many seconds.
        "max_idle": 60.0,
        # After an outage the pool retries with a doubling delay; giving up after this many
        # seconds starts the next request's attempt afresh, so recovery is not left waiting on
        # a back-off that grew as long as the outage.
        "reconnect_timeout": 10.0,
    },
}
# The pool checks a connection (an empty query) before handing it out, so one that a database
# restart or failover broke is replaced instead of failing a request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise environ.ImproperlyConfigured(
        "DATABASE_URL must point at PostgreSQL (postgres://...): memory writes need its "
        "advisory and row locks."
    )

# Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`), consecutive
# transactions of one connection may run on different server connections: nothing may be
# kept on one between transactions. `transaction` turns off prepared statements everywhere
# (the apps' own, the checkpointer's, every direct connection's) and Django's server-side
# cursors; docs/operations.md has the pooler's own settings.
DATABASE_POOL_MODE = env.str("DATABASE_POOL_MODE", default="session")
if DATABASE_POOL_MODE not in ("session", "transaction"):
    raise environ.ImproperlyConfigured(
        f"DATABASE_POOL_MODE is {DATABASE_POOL_MODE!r}: set it to 'session' (PostgreSQL "
        "directly, or a pooler in session mode) or 'transaction' (PgBouncer in transaction mode)."
    )
if DATABASE_POOL_MODE == "transaction":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
PREPARED_STATEMENTS = env.bool("PREPARED_STATEMENTS", default=DATABASE_POOL_MODE == "session")
# PostgreSQL itself, not the pooler, for `manage.py migrate --database direct`
# (scripts/serve-production uses it when set); it mirrors the default database in tests.
if DATABASE_DIRECT_URL := env.str("DATABASE_DIRECT_URL", default=""):
    DATABASES["direct"] = {**env.db_url_config(DATABASE_DIRECT_URL), "TEST": {"MIRROR": "default"}}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# After a login a user lands on their own page; staff reach /admin/ through its own login.
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "yuxi_memory:memory_page"

# django-axes checks every login (the site's and the admin's) before the password is tried.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# Login throttling (docs/operations.md has the reasoning): after LOGIN_FAILURE_LIMIT failed
# logins for one username from one address, every further attempt for that pair (right
# password or not) is refused with 429 until LOGIN_LOCKOUT_SECONDS have passed since its last
# failure; failures during the lockout do not extend it. After LOGIN_USERNAME_DAILY_LIMIT
# failures for a username in 24 hours from any address, the username is refused from every
# address but those it logged in from in the last 30 days (yuxi_site.login_throttle).
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=900)
LOGIN_USERNAME_DAILY_LIMIT = env.int("LOGIN_USERNAME_DAILY_LIMIT", default=50)
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=LOGIN_LOCKOUT_SECONDS)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "yuxi_site.login_throttle.LoginThrottleHandler"
# Every failure is logged (the daily ceiling counts them); each success is in the access log
# (the owner's usual addresses).
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "yuxi_site/lockout.html"
# That page with Retry-After (seconds) on the 429.
AXES_LOCKOUT_CALLABLE = "yuxi_site.login_throttle.lockout_response"
# Staff unlock a username with `manage.py axes_reset_username USERNAME`; axes' own admin pages
# (which could delete attempts) stay off, so the admin's only writes are the ones docs/admin.md
# lists.
AXES_ENABLE_ADMIN = False

# Content-Security-Policy on every response (django-csp): no script, style or image from
# another origin, no inline script, never framed. Swagger UI draws its icons from `data:`.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "img-src": [SELF, "data:"],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
        "base-uri": [SELF],
        "object-src": [NONE],
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# The languages of the user's page (its catalogues ship in memory_app/locale/).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# The reference site's own pages (log in, logged out, locked out) in the same languages, so a
# signed-out user reads them in the language the page was switched to.
LOCALE_PATHS = [BASE_DIR / "yuxi_site" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=str(BASE_DIR / "var" / "static"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed copies made by `collectstatic`; no manifest, so nothing breaks before it ran.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Per-user workspaces live at <WORKSPACE_ROOT>/<uid>/; the root itself is trusted.
WORKSPACE_ROOT = env.path("WORKSPACE_ROOT", default=str(BASE_DIR / "var" / "workspaces"))

# How long a worker's claim on an AgentRun lasts before it must renew it.
AGENT_RUN_LEASE_SECONDS = env.int("AGENT_RUN_LEASE_SECONDS", default=60)

# A run still pending after this long is never claimed, and `fail_expired_runs` fails it.
AGENT_RUN_PENDING_TIMEOUT_SECONDS = env.int("AGENT_RUN_PENDING_TIMEOUT_SECONDS", default=300)

# Upper bound on waiting for the per-user memory advisory lock.
MEMORY_LOCK_TIMEOUT_MS = env.int("MEMORY_LOCK_TIMEOUT_MS", default=5000)

# How many distinct earlier versions of each user's MEMORY.md are kept for undo (0: none).
MEMORY_VERSIONS_KEPT = env.int("MEMORY_VERSIONS_KEPT", default=20)

# A memory write waiting for the user's approval is declined by `fail_expired_runs` after this
# long (seconds; a week by default).
MEMORY_APPROVAL_TTL_SECONDS = env.int("MEMORY_APPROVAL_TTL_SECONDS", default=604800)

# Most connections each checkpoint saver (sync, and async per event loop) of a process opens
# to keep the graphs of turns waiting for an approval; opened on first use.
CHECKPOINT_POOL_MAX = env.int("CHECKPOINT_POOL_MAX", default=4)

# The chat model: an OpenAI-compatible chat-completions endpoint when LLM_BASE_URL is set,
# otherwise the deterministic scripted model (tests, demo).
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
LLM_MODEL = env.str("LLM_MODEL", default="gpt-4o-mini")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=60.0)
# Retries of a failed model request (ChatOpenAI's max_retries), all within the timeout above.
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=1)

# The chat agent's role prompt; unset or empty: the app's own ("You are Yuxi, ..."). The memory
# rules are added after it whatever it says.
if _agent_instructions := env.str("YUXI_AGENT_INSTRUCTIONS", default=""):
    YUXI_AGENT_INSTRUCTIONS = _agent_instructions

# One `key=value` line per event (conversations.utils.log_format). `yuxi.runs` logs run failures and
# `yuxi.memory` every memory change (never memory text), at INFO.
LOG_LEVEL = env.str("LOG_LEVEL", default="WARNING")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"keyvalue": {"()": "conversations.utils.log_format.KeyValueFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "keyvalue"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Propagates to the root's handler; only the level differs.
        EVENT_LOGGER: {"level": "INFO"},
    },
}
