"""Token bookkeeping of multi-turn trajectories: exact ids, masks and logprobs.

The trajectory is built by appending ids; these tests pin the exact layout of a 3-turn
episode with the tiny byte tokenizer (<|endoftext|>=256, <|im_start|>=257,
<|im_end|>=258, "\\n"=198) and prove it equals the chat template's own tokenization of the
same conversation, minus the template's trailing "\\n" (documented in tandem/env/chat.py).
"""

from __future__ import annotations


from tandem.envs.coding.sandbox.runner import ExecResult
from tests._fakes import expected_logprobs
from tests._swe import InProcessEngine, bash, bash_episode, scripted, tiny_tokenizer

IM_START, IM_END, NL = 257, 258, 198
USER_NL = [84, 82, 68, 81, 198]                        # "user\n"
ASSISTANT_NL = [64, 82, 82, 72, 82, 83, 64, 77, 83, 198]  # "assistant\n"


class FixedShell:
    """Deterministic command results, so observations are known in advance."""

    def __init__(self, outputs: dict[str, tuple[str, int]]):
        self.outputs, self.commands = outputs, []

    async def __call__(self, command: str, timeout: float) -> ExecResult:
        self.commands.append(command)
        text, rc = self.outputs[command]
        return ExecResult(text, rc, False, 0.01, len(text))


def run(policy, shell, max_new=4096, **limits):
    episode, env, engine = bash_episode(policy, shell, max_new=max_new, **limits)
    episode.env = env
    return episode, engine


def enc(text: str) -> list[int]:
    return list(tiny_tokenizer().encode(text, add_special_tokens=False))


def test_byte_tokenizer_ids_used_below():
    tok = tiny_tokenizer()
    assert (tok.eos_token_id, tok.pad_token_id) == (IM_END, 256)
    assert enc("<|im_start|>user\n") == [IM_START, *USER_NL]
    assert enc("assistant\n") == ASSISTANT_NL
    assert enc("\n") == [NL]


def test_three_turn_trajectory_exact_layout():
    r1, r2, r3 = bash("ls"), bash("cat a.py"), bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    shell = FixedShell({"ls": ("a.py\n", 0), "cat a.py": ("x = 1\n", 0),
                        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT": ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)})
    episode, engine = run(scripted(r1, r2, r3), shell)
    s = episode.sample
    assert episode.end_reason == "submitted" and len(episode.turns) == 3
    assert shell.commands == ["ls", "cat a.py", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]

    obs1 = "<returncode>0</returncode>\n<output>\na.py\n</output>"
    obs2 = "<returncode>0</returncode>\n<output>\nx = 1\n</output>"
    assert episode.messages[3]["content"] == obs1 and episode.messages[5]["content"] == obs2

    # prompt = the template's tokenization of [system, user] + generation prompt
    sys_text, user_text = episode.messages[0]["content"], episode.messages[1]["content"]
    assert s.prompt_ids == ([IM_START] + enc("system\n" + sys_text) + [IM_END, NL]
                            + [IM_START, *USER_NL] + enc(user_text) + [IM_END, NL] + [IM_START, *ASSISTANT_NL])

    # response = turn ids (ending with the eos the engine emitted) + wrappers that start *after* that eos
    t1, t2, t3 = enc(r1) + [IM_END], enc(r2) + [IM_END], enc(r3) + [IM_END]
    wrap1 = [NL, IM_START, *USER_NL] + enc(obs1) + [IM_END, NL, IM_START, *ASSISTANT_NL]
    wrap2 = [NL, IM_START, *USER_NL] + enc(obs2) + [IM_END, NL, IM_START, *ASSISTANT_NL]
    assert s.response_ids == t1 + wrap1 + t2 + wrap2 + t3
    assert s.loss_mask == [1] * len(t1) + [0] * len(wrap1) + [1] * len(t2) + [0] * len(wrap2) + [1] * len(t3)

    # logprobs: the engine's value for every model token at its absolute position, 0.0 elsewhere
    assert s.rollout_logprobs == expected_logprobs(
        [(t1, True), (wrap1, False), (t2, True), (wrap2, False), (t3, True)], len(s.prompt_ids))

    # each request's input was exactly the trajectory so far: appended, never re-tokenized
    turn_inputs = [r["input_ids"] for r in engine.requests]
    assert turn_inputs == [s.prompt_ids, s.prompt_ids + t1 + wrap1, s.prompt_ids + t1 + wrap1 + t2 + wrap2]


def test_trajectory_matches_chat_template_of_the_conversation():
    r1, r2, r3 = bash("ls -la"), "Thinking...\n" + bash("grep -n x a.py"), bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    shell = FixedShell({"ls -la": ("total 0\n", 0), "grep -n x a.py": ("", 1),
                        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT": ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)})
    episode, _ = run(scripted(r1, r2, r3), shell)
    tok = tiny_tokenizer()
    full = tok.apply_chat_template(episode.messages, tokenize=True, return_dict=False)
    # The only difference: the template ends the final assistant turn with "<|im_end|>\n";
    # the trajectory ends at the <|im_end|> the model generated.
    assert full[-1] == NL and full[-2] == IM_END
    assert episode.sample.tokens == full[:-1]


def test_turn_cut_by_max_new_tokens_gets_the_full_close_with_mask_zero():
    long_reply = bash("echo " + "y" * 40)
    shell = FixedShell({"ls": ("ok\n", 0)})
    episode, _ = run(scripted(long_reply, "```bash\nls\n```"), shell, max_turns=2, max_new=20)
    s = episode.sample
    assert episode.end_reason == "turn_limit"
    t1 = enc(long_reply)[:20]  # cut: no eos
    assert episode.turns[0].finish_reason == "length" and episode.env.commands[0].n_actions == 0
    assert s.response_ids[:20] == t1 and s.loss_mask[:20] == [1] * 20
    # the wrapper now starts with the <|im_end|> the model never produced, masked out
    assert s.response_ids[20:24] == [IM_END, NL, IM_START, *USER_NL[:1]]
    assert s.loss_mask[20] == 0
    assert "output length limit" in episode.messages[3]["content"]
    # and it is what the chat template produces for the cut text
    tok = tiny_tokenizer()
    full = tok.apply_chat_template(episode.messages, tokenize=True, return_dict=False)
    assert s.tokens == full[:-1]


def test_weight_version_is_the_oldest_over_turns():
    tok = tiny_tokenizer()
    versions = iter([3, 2, 4])

    class Versioned(InProcessEngine):
        async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None):
            out = await super().generate(input_ids, sampling_params, routing_key=routing_key)
            out["meta_info"]["weight_version"] = str(next(versions))
            return out

    shell = FixedShell({"ls": ("", 0), "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT":
                        ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)})
    engine = Versioned(tok, scripted(bash("ls"), bash("ls"), bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")))
    episode, _, _ = bash_episode(None, shell, engine=engine)
    assert episode.end_reason == "submitted"
    assert episode.sample.weight_version == 2
