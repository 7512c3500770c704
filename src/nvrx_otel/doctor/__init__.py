"""``nvrx-otel doctor``: identity, resolved configuration, spool state, OTLP reachability."""
