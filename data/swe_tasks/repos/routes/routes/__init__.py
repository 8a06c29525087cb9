from routes.shortest import Graph

__all__ = ["Graph"]
