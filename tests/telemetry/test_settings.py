"""`[telemetry]` in config.toml and the environment: tracing is off unless an OTLP endpoint is named, the
standard OTEL_* variables win over config.toml, and a bad value is CONFIG_INVALID with a hint."""

from __future__ import annotations

import pytest

from relay.errors import ErrorCode, RelayError
from tests.conftest import SettingsFactory

TOKEN = "scraper-token-0123456789abcdef"


def test_telemetry_is_off_by_default(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    assert (settings.otlp_endpoint, settings.metrics_port, settings.metrics_host, settings.metrics_token) == (
        None,
        None,
        "127.0.0.1",
        None,
    )


@pytest.mark.parametrize(
    ("config", "env", "endpoint"),
    [
        ('otlp_endpoint = "http://collector:4318"', {}, "http://collector:4318/v1/traces"),
        ('otlp_endpoint = "http://collector:4318/v1/traces"', {}, "http://collector:4318/v1/traces"),
        ("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example/"}, "https://otel.example/v1/traces"),
        (
            'otlp_endpoint = "http://collector:4318"',
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"},
            "http://env:4318/v1/traces",
        ),
        ("", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:4318/custom"}, "http://env:4318/custom"),
        ('otlp_endpoint = "http://collector:4318"', {"OTEL_SDK_DISABLED": "true"}, None),
        ('otlp_endpoint = "http://collector:4318"', {"OTEL_TRACES_EXPORTER": "none"}, None),
    ],
)
def test_the_traces_endpoint_comes_from_the_otel_variables_over_config_toml(
    make_settings: SettingsFactory, config: str, env: dict[str, str], endpoint: str | None
) -> None:
    assert make_settings(f"[telemetry]\n{config}\n", **env).otlp_endpoint == endpoint


def test_the_metrics_port_host_and_token_come_from_config_toml_or_the_environment(
    make_settings: SettingsFactory,
) -> None:
    configured = make_settings(
        f'[telemetry]\nmetrics_port = 9464\nmetrics_host = "0.0.0.0"\nmetrics_token = "{TOKEN}"\n'
    )
    assert (configured.metrics_port, configured.metrics_host, configured.metrics_token) == (9464, "0.0.0.0", TOKEN)
    by_env = make_settings(
        '[telemetry]\nmetrics_port = 9464\nmetrics_token_env = "SCRAPE"\n', RELAY_METRICS_PORT="9500", SCRAPE=TOKEN
    )
    assert (by_env.metrics_port, by_env.metrics_token) == (9500, TOKEN)


@pytest.mark.parametrize(
    "config",
    [
        'otlp_endpoint = "collector:4318"',
        "otlp_endpoint = 4318",
        'metrics_port = "ninety"',
        "metrics_port = 70000",
        'metrics_token = "short"',
    ],
)
def test_a_bad_telemetry_value_is_a_config_error_with_a_hint(make_settings: SettingsFactory, config: str) -> None:
    with pytest.raises(RelayError) as err:
        make_settings(f"[telemetry]\n{config}\n")
    assert err.value.code is ErrorCode.CONFIG_INVALID and err.value.hint
