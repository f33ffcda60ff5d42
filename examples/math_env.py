"""The rollout function of Axolotl's RLHF guide ("OpenEnv Rollout Functions", math_env.py) for
examples/grpo-rollout.yaml, with its field names made consistent (the guide's transform writes
`prompt` and `answer`, its rollout read `messages` and its reward `answers`: here all three use
the transform's columns) and sized for the embedded tiny model: the answer comes in short steps
of generation until it holds a number, and the reward is graded by closeness so that a tiny
model has something to climb.

rlhf.c calls math_solver_rollout once per generation batch with one dataset row per completion
(each prompt num_generations times); `model` and `processing_class` are rlhf.c's engine and
tokenizer shaped as transformers' (model.generate samples with the policy being trained)."""
import re

_NUMBER = re.compile(r"-?\d+")
_PRESET = ("Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n{}\n\n### Response:\n")


def math_solver_rollout(model, processing_class, prompts, generation_config=None):
    """Custom rollout function that generates solutions step by step.

    Args:
        model: The language model
        processing_class: The tokenizer/processing_class
        prompts: List of prompt dicts (the dataset rows: 'prompt', 'answer')
        generation_config: Optional generation configuration

    Returns:
        List of completion strings
    """
    # A chat prompt gets the chat template; a text prompt is used as it is.
    formatted_prompts = [
        processing_class.apply_chat_template(p["prompt"], tokenize=False, add_generation_prompt=True)
        if isinstance(p["prompt"], list)
        else p["prompt"]
        for p in prompts
    ]
    responses = [""] * len(prompts)
    open_rows = list(range(len(prompts)))
    # Generate step by step (at most 3 steps of 2 tokens) until each response holds an answer;
    # one batched generate call per step for the rows still open (the guide's loop, batched).
    for step in range(3):
        if not open_rows:
            break
        inputs = processing_class(
            [formatted_prompts[i] + responses[i] for i in open_rows], return_tensors="pt"
        ).to(model.device)
        outputs = model.generate(**inputs, max_new_tokens=2, generation_config=generation_config)
        still_open = []
        for row, output in zip(open_rows, outputs):
            step_text = processing_class.decode(
                output[inputs.input_ids.shape[1]:], skip_special_tokens=True
            )
            responses[row] += step_text
            # Check if the solution is complete
            if step_text and not _NUMBER.search(responses[row]):
                still_open.append(row)
        open_rows = still_open
    return responses


def math_reward(prompts, completions, answer, **kwargs):
    """1 for the right number, less the further off it is; 0 without a number."""
    rewards = []
    for completion, correct_answer in zip(completions, answer):
        found = _NUMBER.findall(completion)
        if not found:
            rewards.append(0.0)
            continue
        rewards.append(1.0 / (1.0 + abs(int(found[-1]) - int(correct_answer)) / 4.0))
    return rewards


def math_transform(cfg, *args, **kwargs):
    """Transform dataset to GRPO format with answer field"""

    def transform_fn(example, processing_class=None):
        return {
            "prompt": _PRESET.format(example["question"]),
            "answer": str(example["chosen"]),
        }

    return transform_fn, {"remove_columns": ["question", "chosen", "rejected"]}
