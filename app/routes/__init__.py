"""Thin routers: parse, call the service, return its schema."""
