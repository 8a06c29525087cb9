from rlecodec.codec import decode, encode

__all__ = ["encode", "decode"]
