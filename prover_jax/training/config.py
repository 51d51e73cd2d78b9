"""The trainer's configuration: every field, its default and its meaning, in one place (a credit method's
own section, config.credit.<name>, is declared next to its maths: `default_config` of its class).

Config files in `configs/` call `default_config()` and override what their setting needs:

    # configs/my_run.py
    from prover_jax.training.config import default_config
    def get_config():
        c = default_config()
        c.env.name = "shop"
        return c

and any field can be overridden on the command line: `prover-train --config=configs/my_run.py
--config.rollout.group_size=8 --workdir=W`.
"""

from __future__ import annotations

import ml_collections

from prover_jax.credit.base import method_sections


def load_config_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """`get_config([arg])` of the Python config file at `path` (a config built on another one)."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3] + "_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)


def default_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0  # seeds task order, sampling and initialisation
    c.accelerator = ""  # e.g. "v6e-8": the slice a layout is meant for (memory check); "" = this machine

    # Environment family and tasks.
    c.env = ml_collections.ConfigDict()
    c.env.name = "household"  # envs.names(): household, shop, searchqa, alfworld, webshop, searchqa_data
    c.env.kwargs = ml_collections.ConfigDict()  # family kwargs (e.g. data paths), passed to envs.make
    c.env.processes = False  # one worker process per env (required for alfworld)
    # Splits (envs.base): seed >= 0 is train task seed, seed < 0 is held-out eval task -1 - seed; every
    # family keeps the two task sets disjoint (generated: by content; alfworld: split / eval_split;
    # webshop: eval_goals / train_goal_start; searchqa_data: eval_qa_path / eval_fraction, in kwargs).
    c.env.train_seed_start = 1000  # training tasks are train seeds train_seed_start, +1, ... (>= 0)
    c.env.train_tasks = 0  # > 0: a fixed set of this many training tasks (seeds train_seed_start + [0, n))
    c.env.eval_seeds = 0  # > 0: evaluation only ever plays eval tasks 0 .. eval_seeds - 1; 0 = no cap

    # Policy model.
    c.model = ml_collections.ConfigDict()
    c.model.init = "random"  # random (c.model.size) | hf (HF folder c.model.path) | checkpoint (prover orbax)
    c.model.path = ""  # HF folder (init=hf) or prover checkpoint folder (init=checkpoint); also its tokenizer
    # init=random (no config.json at model.path): the model family (models.families: qwen3_5 | qwen3) ...
    c.model.family = "qwen3_5"
    c.model.size = "demo"  # ... and its named size, e.g. --config.model.family=qwen3 --config.model.size=demo
    c.model.param_dtype = "float32"  # storage dtype of the trained weights
    c.model.dtype = "float32"  # compute dtype (bfloat16 on TPU)
    c.model.scan_layers = False  # True: lax.scan over the repeating layer block (compile time flat in depth)
    c.model.attention = "auto"  # full attention in training: dense | blocked | splash (Pallas TPU) | cudnn | xla
    # | dpa (jax.nn.dot_product_attention: cudnn on a GPU with cuDNN, else xla) | auto (splash on TPU, cudnn on
    # GPU, blocked on CPU: the dense einsums over causal query blocks)
    c.model.gdn_chunk = 0  # delta-rule chunk length; 0 = the backend's (CPU 16, TPU/GPU 64)
    c.model.gdn_matmul_dtype = "auto"  # delta-rule matmul inputs: float32 | bfloat16 | auto (bf16 off CPU)
    # LoRA (models/lora.py, through qwix): rank > 0 trains adapters only; the base weights stay frozen,
    # checkpoints hold the adapters, the sampler gets W + (alpha / rank) A @ B merged on device
    c.model.lora = ml_collections.ConfigDict()
    c.model.lora.rank = 0  # 0: no LoRA (full fine-tuning)
    c.model.lora.alpha = 16.0  # the adapter's scale is alpha / rank
    c.model.lora.targets = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                            "gate_proj", "up_proj", "down_proj")  # the projections that get adapters
    c.model.lora.dropout = 0.0  # dropout on the adapter's input: only 0 (not supported in the train step)

    # Tokenizer: the checkpoint's (hf / checkpoint), else trained on the env's text.
    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.vocab_size = 1024  # for a trained tokenizer (must not exceed the model's vocab)
    c.tokenizer.corpus_seeds = 200  # expert episodes of the env used to train it
    c.tokenizer.phrases = True  # BPE merges across spaces: a command is one token, copied from the obs

    # Device mesh (data, fsdp, tensor); -1 takes the remaining devices.
    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = 1  # data-parallel axis: replicas of the weights, batch split over them
    c.mesh.fsdp = -1  # fully sharded axis: weights, optimizer state and batch split over it
    c.mesh.tensor = 1  # tensor-parallel axis: each layer's matmuls split over it

    # Rollouts (sampling engine + multi-turn loop).
    c.rollout = ml_collections.ConfigDict()
    c.rollout.groups_per_step = 4  # tasks per optimizer step
    c.rollout.group_size = 8  # G rollouts per task
    c.rollout.temperature = 1.0  # policy sampling temperature (0 = greedy)
    c.rollout.top_p = 1.0  # nucleus sampling mass; 1.0 = off
    c.rollout.top_k = 0  # sample among the k likeliest tokens; 0 = off
    c.rollout.max_action_tokens = 48  # token budget of one response
    c.rollout.max_turns = 0  # 0: the family's own turn limit
    c.rollout.max_invalid_actions = 0  # > 0: an episode ends, unsuccessful, at its n-th inadmissible action
    # the conversation's layout (rollout/template.py): auto = the checkpoint's own chat template (ChatML for a
    # tokenizer without one, e.g. a built-in trained one) | chatml; history is kept append-only
    c.rollout.chat_template = "auto"
    c.rollout.enable_thinking = False  # the generation prompt opens a think block (the template's own; auto only)
    c.rollout.observation_role = "user"  # observations as user messages, or tool (the template's tool responses; auto)
    c.rollout.system_prompt = ""  # "": the family's own system prompt; else this text replaces it
    c.rollout.max_concurrent_decodes = 32  # engine slots
    # row counts a batched prefill and an insert are padded to, each compiled once: () = 1, 2, 4, ... up
    # to the slots; fewer (e.g. (8, 32)) trade padding rows for fewer compiles in the steady state
    c.rollout.row_buckets = ()
    # lengths a prefill's new tokens are padded to, each compiled once (with each row count): () = powers
    # of two from 8 up to max_prefill_length; lengths that fit the env's turns cut padded tokens
    c.rollout.prefill_lengths = ()
    # DAPO's dynamic sampling (training/dynamic.py): off | drop (train only on groups whose outcomes differ)
    # | refill (draw and play more task batches until groups_per_step such groups, at most max_draws batches)
    c.rollout.dynamic_sampling = "off"
    c.rollout.max_draws = 3  # refill: most task batches played per step (the first included)
    c.rollout.off_policy_steps = 0  # 1: the next step's batch plays with the old weights during the update
    c.rollout.warmup = False  # compile every prefill / insert / decode shape of the sampler at start
    c.rollout.decode_steps_per_call = 1  # decode steps per jitted call (end conditions checked on device)
    # "": decode in the model's compute dtype; "bfloat16": from bf16 copies of the weights (half the bytes
    # per decode step); the loss's ratio is against the log-probs that sampler records
    c.rollout.dtype = ""
    c.rollout.max_prefill_length = 1024  # longest prompt piece the engine prefills at once (tokens)
    c.rollout.max_target_length = 4096  # longest episode (tokens); longer ones end as context_limit
    # device memory per process for the sampler's cache after each turn of the step's episodes, kept
    # for credit methods that continue from a turn (prover, spo_chain) so a continuation prefills only
    # the observation before its turn; episodes beyond it re-prefill their history (0: keep none). Off:
    # on the CPU demo it costs more than the short histories it saves (bench/RESULTS.md); for long
    # histories on an accelerator try e.g. 4096
    c.rollout.context_budget_mb = 0.0

    # Loss (GRPO with per-token advantages).
    c.loss = ml_collections.ConfigDict()
    c.loss.eps_low = 0.2  # ratio clip: [1 - eps_low, 1 + eps_high]
    c.loss.eps_high = 0.2  # upper ratio clip (clip-higher when > eps_low)
    c.loss.dual_clip = 0.0  # c > 1 enables the dual clip for A < 0 (3.0 in the literature); 0 = off
    c.loss.kl_coef = 0.0  # KL (loss.kl_estimator) to the frozen initial policy; 0 = no reference model
    c.loss.kl_estimator = "k3"  # k3: e^d - d - 1 (d = logp_ref - logp) | k1: -d | k2: d^2/2 | k3+: k3, k2's gradient
    c.loss.entropy_coef = 0.0  # entropy bonus: loss -= entropy_coef * aggregated token entropy; 0 = off
    c.loss.entropy_metric = True  # log the policy entropy (a pass over [tokens, vocab]; always on when entropy_coef != 0)
    c.loss.tis_cap = 0.0  # > 0 with off_policy_steps = 1: truncated importance weight min(pi_old / pi_behaviour, cap)
    c.loss.aggregation = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    c.loss.horizon = ml_collections.config_dict.placeholder(int)  # T of seq-mean-token-sum-norm (None: rollout.max_target_length)
    c.loss.ratio_level = "token"  # token | sequence (GSPO: each token takes its sequence's length-normalised ratio)
    # DAPO's overlong handling (credit/shaping.py): episodes cut by rollout.max_target_length leave the loss
    c.loss.mask_truncated = False
    # soft overlong punishment: an episode of len > Lmax - buffer tokens gets -coef min(len - (Lmax - buffer),
    # buffer) / buffer added to its reward (group-centred onto its advantages); buffer 0 or coef 0 = off
    c.loss.overlong_penalty = ml_collections.ConfigDict()
    c.loss.overlong_penalty.buffer = 0  # tokens before rollout.max_target_length where the penalty starts
    c.loss.overlong_penalty.coef = 0.0  # the penalty at and beyond the limit (reward units)

    # Optimizer (optax).
    c.optim = ml_collections.ConfigDict()
    c.optim.name = "adamw"  # adamw | adam | sgd
    # peak RL learning rate (after warmup_steps): the rate that learns on configs/learn.py, a ~0.56M policy
    # trained from scratch (lever table in bench/LEARNING.md); pretrained LLMs want far less (the pod
    # configs set 1e-5)
    c.optim.learning_rate = 3e-4
    c.optim.b1 = 0.9  # Adam first-moment decay (adamw | adam)
    c.optim.b2 = 0.999  # Adam second-moment decay (adamw | adam)
    c.optim.eps = 1e-8  # Adam's epsilon: update = m / (sqrt(v) + eps) (adamw | adam)
    c.optim.weight_decay = 0.0  # adamw's decoupled weight decay (not on norms and biases)
    c.optim.grad_clip = 1.0  # global-norm clip; 0 = off
    # a batch with an exactly zero gradient (every advantage 0) leaves weights and optimizer state as they are;
    # False: Adam steps on its moments anyway, moving the weights with no signal (training/step.py)
    c.optim.skip_zero_grad = True
    c.optim.warmup_steps = 0  # linear learning-rate warmup over this many updates; 0 = none
    c.optim.decay_steps = 0  # > 0: after warmup the rate decays over this many updates; 0 = constant
    c.optim.decay = "cosine"  # cosine | linear (with decay_steps > 0)
    c.optim.end_lr_frac = 0.0  # the decayed rate ends at end_lr_frac * learning_rate
    # warmup_decay (the fields above) | warmup_cosine (optax's: from 0, to the end rate at update decay_steps >= 1,
    # the warmup included)
    c.optim.schedule = "warmup_decay"

    # Training loop.
    c.train = ml_collections.ConfigDict()
    c.train.steps = 100  # RL steps (batches played and trained on)
    c.train.micro_batch_size = 8  # sequences per gradient-accumulation micro-batch
    # PPO epochs: each RL batch is cut into mini_batches mini-batches (of whole micro-batches) and passed
    # over ppo_epochs times, one optimizer update per mini-batch (the ratio against the behaviour
    # log-probs leaves 1, so the clip acts); 1 and 1: one update per batch. optim's warmup / decay count
    # optimizer updates (ppo_epochs * mini_batches per RL step)
    c.train.ppo_epochs = 1  # passes over each RL batch
    c.train.mini_batches = 1  # optimizer updates per pass (the batch cut into this many mini-batches)
    c.train.length_multiple = 128  # batch length padded to a multiple of this: fewer shapes to compile
    # > 0: packed rows of this many tokens, episodes placed first-fit by decreasing length (segment ids
    # keep each episode's forward its own); >= rollout.max_target_length. 0: one episode per row
    c.train.max_tokens_per_row = 0
    # packed batches: the micro-batch counts a batch is padded to, each compiled once (train.precompile, prover-aot);
    # () = 1, 2, 4, ... and the unpacked count (a step's episodes one per row): fewer compiles, some padding rows
    c.train.packed_buckets = ()
    c.train.logprob_chunk = 0  # >0: log-probs computed in chunks of this many positions (large vocab)
    # where the RL update projects onto the vocabulary: all (every position) | policy (the policy tokens
    # only, padded per row to a multiple of 128 positions; the loss needs no other)
    c.train.logits = "all"
    c.train.precompile = False  # compile the update for every batch-length bucket before the 1st step
    c.train.remat = "none"  # activations recomputed in the backward pass, per layer block: none | full | dots
    c.train.checkpoint_every = 10  # orbax checkpoint every this many steps (and after the last)
    c.train.keep_checkpoints = 2  # newest checkpoints kept in WORKDIR/checkpoints
    c.train.on_corrupt_checkpoint = "error"  # newest checkpoint unreadable: error | previous (warn, resume older)
    c.train.eval_every = 0  # 0: evaluate only before and after training
    # greedy episodes per evaluation, one per distinct eval task (fewer when the eval split is smaller):
    # 200 puts the standard error at <= 3.5 points (p = 0.5), 32 would leave it at 8.8
    c.train.eval_episodes = 200
    # > 0: each eval task also played this many times at the rollout's sampling settings: eval/sampled_success
    # (pass@1) and eval/pass@k for k = 2, 4, ... up to it (unbiased estimator); 0: greedy success only
    c.train.eval_samples = 0
    c.train.eval_temperature = 1.0  # the sampling temperature of those episodes (rollout.top_k / top_p as set)
    # > 0: N episodes of each RL step and of each evaluation written to WORKDIR/episodes/ as JSON lines (text as
    # the policy saw it, turns, advantages, the credit method's notes; training/episodes.py); `prover-episodes W`
    c.train.dump_episodes = 0
    # where metrics.jsonl's rows also go (process 0; training/trackers.py): tensorboard (WORKDIR/tensorboard/) | wandb
    # | trackio (the trackers extra; the run id kept in WORKDIR/trackers.json, so a resume continues the same run)
    c.train.loggers = ("tensorboard",)
    c.train.tracker_project = "prover_jax"  # the wandb / trackio project

    # Supervised warm start on expert demonstrations (before RL; skipped when steps = 0).
    c.sft = ml_collections.ConfigDict()
    c.sft.steps = 0  # SFT optimizer steps; 0 = no warm start
    c.sft.episodes = 256  # expert episodes (seeds train_seed_start ...)
    c.sft.batch_size = 16  # demonstrations per SFT step
    c.sft.successes_only = True  # train on the demonstrator's successful episodes only (False: on all of them)
    c.sft.learning_rate = 1e-3  # peak Adam learning rate
    c.sft.warmup_steps = 20  # linear warmup, then cosine decay
    c.sft.final_lr_frac = 0.05  # the cosine's end rate (at update sft.steps, after the last), over the peak
    # SFT's optimizer (the RL step's registry, `make_optimizer`; the schedule comes from the fields above)
    c.sft.optim = ml_collections.ConfigDict()
    c.sft.optim.name = "adam"  # adamw | adam | sgd
    c.sft.optim.b1 = 0.9  # Adam first-moment decay
    c.sft.optim.b2 = 0.999  # Adam second-moment decay
    c.sft.optim.eps = 1e-8  # Adam's epsilon
    c.sft.optim.weight_decay = 0.0  # adamw only
    c.sft.optim.grad_clip = 1.0  # global-norm clip; 0 = off

    # Credit assignment: the shared fields, then each registered method's own section,
    # config.credit.<name>, declared next to its maths (`default_config` in prover_jax/credit/<name>.py).
    c.credit = ml_collections.ConfigDict()
    c.credit.method = "prover"  # registered estimators: grpo | prover | budget_grpo | gigpo | spo_chain | critic
    c.credit.overlap = True  # plans (judges) and continuations start while the step's other episodes still run
    # scale of the group-centred rewards R - mean_g(R): none (Dr.GRPO, the paper's) | group (/ std_g + 1e-6,
    # classic GRPO) | batch (/ std of the batch's rewards + 1e-6); gigpo keeps its own gigpo.std
    c.credit.std_scope = "none"
    # eligible groups of the methods that spend extra samples (prover, budget_grpo, spo_chain):
    # band_low < success rate < band_high
    c.credit.band_low = 0.0
    c.credit.band_high = 0.5  # upper end of the band (see band_low)
    for name, section in method_sections().items():
        c.credit[name] = section

    # Judge that proposes the pivotal segment.
    c.judge = ml_collections.ConfigDict()
    c.judge.name = "contrastive"  # openai | random | contrastive | oracle (the env's pivot rules; household)
    c.judge.max_repairs = 3  # invalid replies the judge is told about and asked again; then dropped
    c.judge.timeout_s = 300.0  # a group's proposal is dropped (reason: timeout) this long after its group ended
    c.judge.max_concurrency = 16  # groups judged at once (worker threads)
    c.judge.contrastive = ml_collections.ConfigDict()  # the contrastive judge (judges/contrastive.py)
    c.judge.contrastive.ignore_fields = ("turn", "note", "done")  # snapshot fields left out of state equality
    c.judge.contrastive.choice = "latest"  # which departure: latest | shared (most failed runs; ties later) | earliest
    c.judge.openai = ml_collections.ConfigDict()
    c.judge.openai.base_url = ""  # any OpenAI-compatible endpoint (empty: the client's default)
    c.judge.openai.model = "gpt-4.1-mini"  # the judge model
    c.judge.openai.api_key_env = "OPENAI_API_KEY"  # env variable with the key (not needed when self-hosted)
    c.judge.openai.timeout_s = 60.0  # bounds each request attempt as a whole (not each read)
    c.judge.openai.max_retries = 4  # retries of 429 / 5xx / connection errors, exponential backoff
    c.judge.openai.max_calls_per_step = 64  # budget; over it, proposals are dropped (reason: budget)
    c.judge.openai.usd_per_m_input = 0.4  # price per million prompt tokens (judge/cost_usd)
    c.judge.openai.usd_per_m_output = 1.6  # price per million completion tokens
    c.judge.openai.cache = True  # responses cached by content hash in WORKDIR/judge_cache
    c.judge.openai.max_tool_rounds = 8  # model calls per proposal before giving up (plus repairs)
    c.judge.openai.tool_choice = "auto"  # auto: not constrained | required: every reply calls a tool (any offered one)
    c.judge.openai.backoff_base_s = 1.0  # retry wait = base * 2^attempt (capped), Retry-After honoured
    c.judge.openai.backoff_max_s = 30.0  # cap of one retry wait
    c.judge.openai.preview_chars = 2500  # characters per failed-run preview shown to the judge
    c.judge.openai.enable_thinking = ml_collections.config_dict.placeholder(bool)  # Qwen3.5 thinking; None: not sent
    # the judge served beside training (prover_jax.serving.beside): every process serves its own judge
    # calls on its own devices, and the openai judge is pointed at it (judge.name must be openai)
    c.judge.serve = ml_collections.ConfigDict()
    c.judge.serve.model = ""  # judge checkpoint folder (HF or prover, with tokenizer + chat template); '' = none
    c.judge.serve.size = ""  # judge architecture for prover-aot when serve.model is not readable (e.g. 9B)
    c.judge.serve.tensor = 0  # tensor-parallel degree over the host's devices (0: all of them)
    c.judge.serve.max_concurrent_decodes = 16  # judge engine slots per host
    c.judge.serve.max_target_length = 16384  # prompt + reply tokens of one judge call (tool rounds included)
    c.judge.serve.max_prefill_length = 2048  # longest prompt piece prefilled at once
    c.judge.serve.max_string_chars = 200  # free-text strings of constrained tool calls end after this
    c.judge.serve.dtype = "bfloat16"  # judge weights and compute
    c.judge.serve.host = "127.0.0.1"  # bind address; callers need the per-run key (LocalJudge.api_key)
    c.judge.serve.port = 0  # 0: a free port
    return c
