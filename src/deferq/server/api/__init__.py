"""The REST API v1: routes, request and answer models, the OpenAPI document."""
