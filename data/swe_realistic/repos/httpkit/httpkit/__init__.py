from httpkit.status import StatusClass, backoff, is_retryable, parse_retry_after, status_class

__all__ = ["StatusClass", "backoff", "is_retryable", "parse_retry_after", "status_class"]
