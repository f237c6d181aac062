"""Service layer: request schemas in, pipeline calls, response schemas out (no HTTP here)."""
