"""The apps' own per-user staff pages, served by the memory app's admin whatever the host's
user model and user admin are: a user's memory as the agent reads it, the ledger, where each
line came from, the kept versions, pending approvals and links to their history, reached by
user id (`<admin>/memory_app/userconfig/user/<id>/`) or by the value of the user model's
`USERNAME_FIELD` (`.../user/?name=<value>`); and the erase page, which goes through
`erase_user`. The pages of a user with no memory config row show memory off and still work.
"""

from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from conversations.admin_base import changelist_url, user_url
from conversations.users import user_label, users_named
from memory_app.models import UserConfig
from memory_app.services import erase_user
from memory_app.user_admin import user_records
from memory_app.user_data import erasure_counts

# The erase page's URL name in the admin's namespace.
ERASE_URL_NAME = "yuxi_user_erase"
# The sections of a user's page: the config admin's display method and its heading.
USER_PAGE_SECTIONS = (
    ("memory_switch", "Memory switch"),
    ("approval_switch", "Approval of each write"),
    ("approvals", "Memory writes waiting for the user's decision"),
    ("memory_preview", "MEMORY.md as the agent sees it"),
    ("ledger", "Memory ledger"),
    ("line_origins", "Where each line came from"),
    ("memory_versions", "Kept versions"),
)


def _user_or_404(user_id: str) -> Any:
    User = get_user_model()
    try:
        user = User.objects.filter(pk=user_id).first()
    except (ValueError, ValidationError):
        user = None
    if user is None:
        raise Http404(f"no user with id {user_id!r}")
    return user


def _can_view(model_admin: ModelAdmin, request: HttpRequest) -> None:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied


def _can_erase(request: HttpRequest) -> bool:
    opts = get_user_model()._meta
    return request.user.has_perm(f"{opts.app_label}.delete_{opts.model_name}")


def find_user(model_admin: ModelAdmin, request: HttpRequest) -> HttpResponse:
    """`?name=<USERNAME_FIELD value>`: on to that user's page; without it, the lookup form."""
    _can_view(model_admin, request)
    name = request.GET.get("name", "").strip()
    found = users_named(name) if name else []
    if found:
        return HttpResponseRedirect(user_url(found[0]))
    field = get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Find a user's memory and history",
        "field_label": field.verbose_name,
        "name": name,
        "not_found": bool(name),
    }
    return TemplateResponse(request, "admin/memory_app/find_user.html", context)


def user_page(model_admin: ModelAdmin, request: HttpRequest, user_id: str) -> HttpResponse:
    """Everything the apps' admin shows about one user's memory, config row or not."""
    _can_view(model_admin, request)
    user = _user_or_404(user_id)
    config = UserConfig.objects.filter(user=user).first() or UserConfig(user=user)
    sections = [(title, getattr(model_admin, name)(config)) for name, title in USER_PAGE_SECTIONS]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"{user_label(user)}: memory and history",
        "subject": user,
        "name": user_label(user),
        "username_field": get_user_model().USERNAME_FIELD,
        "config_url": (
            reverse("admin:memory_app_userconfig_change", args=[config.pk]) if config.pk else ""
        ),
        "records": user_records(user_id=user.pk, name=user_label(user)),
        "sections": sections,
        "erase_url": reverse(f"admin:{ERASE_URL_NAME}", args=[user.pk])
        if _can_erase(request)
        else "",
        "opts": UserConfig._meta,
    }
    return TemplateResponse(request, "admin/memory_app/user_page.html", context)


def erase_page(model_admin: ModelAdmin, request: HttpRequest, user_id: str) -> HttpResponse:
    """GET: what erasing the user deletes, as counts; POST: `erase_user`. For staff allowed to
    delete users of the host's user model."""
    _can_view(model_admin, request)
    if not _can_erase(request):
        raise PermissionDenied
    user = _user_or_404(user_id)
    name = user_label(user)
    if request.method == "POST":
        report = erase_user(user=user, actor=request.user)
        counts = report.counts.items()
        erased = ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in counts)
        messages.success(request, f"{name} erased: {erased}.")
        return HttpResponseRedirect(changelist_url(UserConfig))
    counts = erasure_counts(user_ids=[user.pk])
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Erase {name}?",
        "name": name,
        "counts": [(kind.replace("_", " "), count) for kind, count in counts.items()],
        "page_url": user_url(user.pk),
        "opts": UserConfig._meta,
    }
    return TemplateResponse(request, "admin/memory_app/erase_user.html", context)
