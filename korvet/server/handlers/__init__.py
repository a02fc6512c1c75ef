"""Per-API request handlers: each turns a kio request into storage calls and a kio response."""
