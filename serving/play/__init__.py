"""The /play page: static files and the episode API behind them."""
