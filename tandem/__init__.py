"""tandem: single-node, all-in-one RL post-training for LLM agents."""
