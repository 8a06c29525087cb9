from throttle.bucket import TokenBucket

__all__ = ["TokenBucket"]
