"""What LLaMA-Factory's training arguments mean in gym.toml: one table for flags and `gym init --from`.

Every LLaMA-Factory argument falls in one of four groups:

* :data:`ALIASES` map one to one onto a gym.toml key (``learning_rate`` -> ``train.learning_rate``);
* :data:`CONVERTED` need their value translated (``bf16`` -> ``model.dtype = "bfloat16"``); the flag
  parser in :mod:`gym.config.flags` holds those handlers;
* :data:`IGNORED` have no meaning in Gym, because Gym always does (or never needs) what they switch:
  they are accepted with a one-line note, so a team's existing command line keeps working;
* everything else is refused (flags) or listed as not carried over (`gym init --from`).
"""

from __future__ import annotations

KeyPath = tuple[str | int, ...]

ALIASES: dict[str, KeyPath] = {
    "model_name_or_path": ("model", "name_or_path"),
    "model_revision": ("model", "revision"),
    "template": ("model", "template"),
    "trust_remote_code": ("model", "trust_remote_code"),
    "project_name": ("project", "name"),
    "output_dir": ("project", "output_dir"),
    "stage": ("train", "method"),
    "num_train_epochs": ("train", "epochs"),
    "max_steps": ("train", "max_steps"),
    "learning_rate": ("train", "learning_rate"),
    "lr_scheduler_type": ("train", "lr_scheduler"),
    "warmup_ratio": ("train", "warmup_ratio"),
    "weight_decay": ("train", "weight_decay"),
    "per_device_train_batch_size": ("train", "batch_size"),
    "gradient_accumulation_steps": ("train", "gradient_accumulation_steps"),
    "cutoff_len": ("train", "max_length"),
    "packing": ("train", "packing"),
    "seed": ("train", "seed"),
    "logging_steps": ("train", "logging_steps"),
    "save_steps": ("train", "save_steps"),
    "save_total_limit": ("train", "save_total_limit"),
    "resume_from_checkpoint": ("train", "resume"),
    "report_to": ("train", "report_to"),
    "lora_rank": ("train", "lora", "r"),
    "lora_alpha": ("train", "lora", "alpha"),
    "lora_dropout": ("train", "lora", "dropout"),
    "lora_target": ("train", "lora", "target_modules"),
    "freeze_trainable_layers": ("train", "freeze", "trainable_layers"),
    "pref_beta": ("train", "dpo", "beta"),
    "kto_chosen_weight": ("train", "kto", "desirable_weight"),
    "kto_rejected_weight": ("train", "kto", "undesirable_weight"),
    "reward_model": ("train", "ppo", "reward_model"),
    "ppo_epochs": ("train", "ppo", "ppo_epochs"),
    "hub_model_id": ("hub", "repo_id"),
    "grpo_training_free": ("train", "grpo", "training_free"),
    "grpo_experience_lib_path": ("train", "grpo", "experience_lib_path"),
    "grpo_group_size": ("train", "grpo", "group_size"),
    "grpo_reward": ("train", "grpo", "reward"),
    "grpo_api_base": ("train", "grpo", "api_base"),
    "enable_liger_kernel": ("train", "liger_kernel"),
    "use_liger_kernel": ("train", "liger_kernel"),  # transformers' TrainingArguments name (TRL's YAMLs)
    "max_samples": ("datasets", "*", "max_samples"),
    "val_size": ("datasets", "*", "eval_fraction"),
}

CONVERTED = {
    "finetuning_type": "train.adapter (lora, full, freeze), or train.method for the seed's grpo",
    "quantization_bit": "model.quantization (4: bnb-4bit with qlora, 8: bnb-8bit)",
    "use_dora": "train.adapter = 'dora'",
    "bf16": "model.dtype = 'bfloat16'",
    "pure_bf16": "model.dtype = 'bfloat16'",
    "fp16": "model.dtype = 'float16'",
    "overwrite_output_dir": "train.resume = 'never' (start over instead of resuming)",
    "neat_packing": "train.packing = true (packed rows never attend to each other in Gym)",
    "pref_loss": "train.dpo.loss_type",
    "dataset": "[[datasets]] tables through dataset_info.json",
    "dataset_dir": "where dataset_info.json is looked up",
}

IGNORED = {
    "do_train": "gym train always trains",
    "do_eval": "Gym evaluates the rows held out by datasets.eval_fraction by itself",
    "do_predict": "benchmarks run with `gym eval`",
    "plot_loss": "Gym always records the loss curve in train_results.json and the model card",
    "overwrite_cache": "Gym's prepared-data cache is keyed by the data's content, so it is never stale",
    "preprocessing_num_workers": "Gym chooses its own data-preparation workers",
    "dataloader_num_workers": "Gym chooses its own data-loading workers",
    "ddp_timeout": "Gym sets the distributed timeouts itself",
    "ddp_find_unused_parameters": "Gym turns DDP's search on only for models that skip weights (MoE, vision)",
    "logging_dir": "logs are written under project.output_dir",
    "include_num_input_tokens_seen": "Gym always counts tokens (tokens/s in train_results.json)",
    "use_fast_tokenizer": "the tokenizer's fast implementation is always used",
    "disable_tqdm": "Gym shows its own progress bar",
    "flash_attn": "transformers picks the attention kernel for the hardware",
}

BOOLEAN = frozenset(
    {
        "do_train", "do_eval", "do_predict", "plot_loss", "overwrite_cache", "overwrite_output_dir",
        "bf16", "pure_bf16", "fp16", "include_num_input_tokens_seen", "use_fast_tokenizer", "disable_tqdm",
        "ddp_find_unused_parameters", "enable_liger_kernel", "use_liger_kernel", "use_dora", "packing",
        "neat_packing",
        "trust_remote_code", "grpo_training_free",
    }
)  # fmt: skip
"""Options LLaMA-Factory accepts bare (``--bf16`` means ``--bf16 true``)."""

DPO_LOSSES = {"sigmoid": "sigmoid", "ipo": "ipo", "hinge": "hinge", "orpo": "orpo", "simpo": "simpo"}
