"""Token formats detect-secrets 1.5 has no plugin for, written as detect-secrets plugins.

Each is a `RegexBasedDetector` (detect-secrets' own base: a `secret_type` and a `denylist` of
compiled patterns), so the credential detector calls them exactly as it calls detect-secrets'
plugins. The patterns follow gitleaks' maintained rule set (its rule ids are named beside each
one); where gitleaks pins an exact length, the length is a lower bound here, since a provider
lengthening its keys must not let them through:

- GitHub fine-grained personal access tokens, `github_pat_` (gitleaks `github-fine-grained-pat`;
  detect-secrets knows only `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`);
- Slack app-level and configuration tokens, `xapp-` and `xoxe` (gitleaks `slack-app-token`,
  `slack-config-access-token`, `slack-config-refresh-token`; detect-secrets knows `xox[baprs]-`
  and webhooks);
- Stripe test and restricted keys, `sk_test_`, `rk_test_`, `*_prod_` (gitleaks
  `stripe-access-token`; detect-secrets knows only `sk_live_`/`rk_live_`);
- Google API keys, `AIza` (gitleaks `gcp-api-key`);
- OpenAI project, service-account and admin keys, `sk-proj-`, `sk-svcacct-`, `sk-admin-`
  (gitleaks `openai-api-key` also wants its `T3BlbkFJ` marker; the prefix alone is OpenAI's);
- Anthropic API and admin keys, `sk-ant-api03-`, `sk-ant-admin01-` (gitleaks
  `anthropic-api-key`, `anthropic-admin-api-key`).

A leaf: it imports nothing of the app.
"""

import re

from detect_secrets.plugins.base import RegexBasedDetector

__all__ = ["EXTRA_ACCESS_TOKEN_PLUGINS", "EXTRA_API_KEY_PLUGINS"]


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub fine-grained personal access tokens."""

    secret_type = "GitHub fine-grained token"
    denylist = (re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{82,}"),)


class SlackAppTokenDetector(RegexBasedDetector):
    """Slack app-level tokens and app configuration tokens."""

    secret_type = "Slack app or configuration token"
    denylist = (
        re.compile(r"(?<![A-Za-z0-9])xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", re.IGNORECASE),
        re.compile(r"(?<![A-Za-z0-9])xoxe(?:\.xox[bp])?-\d-[A-Z0-9]{140,}", re.IGNORECASE),
    )


class StripeKeyDetector(RegexBasedDetector):
    """Stripe secret and restricted keys of every mode (detect-secrets: live ones only)."""

    secret_type = "Stripe key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,}"),)


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google Cloud / Maps / Firebase API keys."""

    secret_type = "Google API key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])"),)


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI project, service-account and admin keys (detect-secrets: the older `sk-` keys)."""

    secret_type = "OpenAI key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}"),)


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API and admin keys."""

    secret_type = "Anthropic key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{80,}"),)


# By the kind the detector files them under.
EXTRA_API_KEY_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    StripeKeyDetector,
    GoogleApiKeyDetector,
    OpenAIProjectKeyDetector,
    AnthropicKeyDetector,
)
EXTRA_ACCESS_TOKEN_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    GitHubFineGrainedTokenDetector,
    SlackAppTokenDetector,
)
