"""Serving the documents: HTTP (Flask app, waitress listener, Host and peer checks), `/metrics` and the
MCP server. It reads documents from a source (`server.DocumentSource`) and never polls."""
