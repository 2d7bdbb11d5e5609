"""Redaction against real command lines, both ways: every secret hidden, nothing else touched."""

from __future__ import annotations

import shlex

import pytest

from sidecar.sources.redact import REDACTED, redact_args

# (command line, the same with secrets replaced by ***); equal strings: nothing may change.
CASES = [
    # -- secrets ---------------------------------------------------------------------------------
    ("python train.py --wandb-key K3y", "python train.py --wandb-key ***"),
    ("python train.py --wandb_key=K3y", "python train.py --wandb_key=***"),
    ("sshpass -p PASS ssh node1", "sshpass -p *** ssh node1"),
    (
        "curl -H 'Authorization: Bearer X' https://api.example/v1",
        "curl -H 'Authorization: ***' https://api.example/v1",
    ),
    ("curl --header 'X-Api-Key: abc123' https://h", "curl --header 'X-Api-Key: ***' https://h"),
    ("curl -H 'Cookie: session=abc' https://h", "curl -H 'Cookie: ***' https://h"),
    ("python serve.py --key=K", "python serve.py --key=***"),
    ("python serve.py --key K", "python serve.py --key ***"),
    ("aws configure set --access-key-id AKIAABCDEFGHIJKLMNOP", "aws configure set --access-key-id ***"),
    ("python up.py --aws-secret-access-key wJalrXUt", "python up.py --aws-secret-access-key ***"),
    ("python up.py --secret-key=abc", "python up.py --secret-key=***"),
    ("python train.py --api-key X", "python train.py --api-key ***"),
    ("python train.py --api_key X", "python train.py --api_key ***"),
    ("python train.py --apikey X", "python train.py --apikey ***"),
    ("python train.py --token=X", "python train.py --token=***"),
    ("python train.py --hf_token hf_abc", "python train.py --hf_token ***"),
    ("python train.py --hub-token X", "python train.py --hub-token ***"),
    ("python train.py --auth-token X --epochs 3", "python train.py --auth-token *** --epochs 3"),
    ("python db.py --db-password=X", "python db.py --db-password=***"),
    ("python db.py --password X", "python db.py --password ***"),
    ("python db.py --passwd X", "python db.py --passwd ***"),
    ("python app.py --client-secret X", "python app.py --client-secret ***"),
    ("python app.py --github-pat X", "python app.py --github-pat ***"),
    ("python app.py --ssh-passphrase X", "python app.py --ssh-passphrase ***"),
    ("python app.py --credentials X", "python app.py --credentials ***"),
    ("env WANDB_API_KEY=X python train.py", "env WANDB_API_KEY=*** python train.py"),
    (
        "env HF_TOKEN=X AWS_SECRET_ACCESS_KEY=Y python t.py",
        "env HF_TOKEN=*** AWS_SECRET_ACCESS_KEY=*** python t.py",
    ),
    ("python t.py db_password=X", "python t.py db_password=***"),
    ("python t.py --url https://h/x?token=abc&page=2", "python t.py --url https://h/x?token=***&page=2"),
    ("git clone https://user:s3cret@github.com/x/y", "git clone https://user:***@github.com/x/y"),
    ("python t.py --db postgres://bob:pw@db:5432/x", "python t.py --db postgres://bob:***@db:5432/x"),
    ("python t.py --hub hf_abcdefghijklmnopqrstuvwx", "python t.py --hub ***"),
    ("python t.py ghp_abcdefghijklmnopqrstuvwxyz0123", "python t.py ***"),
    ("python t.py --openai sk-abcdefghijklmnopqrstuvwx", "python t.py --openai ***"),
    ("python t.py --id AKIAABCDEFGHIJKLMNOP", "python t.py --id ***"),
    ("python t.py --no-auth --port 8080", "python t.py --no-auth --port 8080"),
    # -- left alone --------------------------------------------------------------------------------
    ("python generate.py --max-tokens 512", None),
    ("python generate.py --max_new_tokens 256 --min-tokens 1", None),
    ("python train.py --tokenizer gpt2", None),
    ("python train.py --tokenizer_name bert-base-uncased --tokens-per-batch 4096", None),
    ("python train.py --num-tokens 1000000", None),
    ("python train.py --keep-checkpoints 3 --keyframes 10", None),
    ("python train.py --password-file /run/secrets/db", None),
    ("python train.py --token-file /run/secrets/hf", None),
    ("python train.py --pass-through --bypass-cache", None),
    ("torchrun --nproc-per-node=8 --master-port 29500 train.py --lr 3e-4", None),
    ("docker run -p 8080:80 image", None),
    ("ssh -p 2222 node1", None),
    ("python -m torch.distributed.run --nnodes 2 train.py --batch-size 64", None),
    ("accelerate launch --config_file cfg.yaml train.py --seed 42", None),
    ("python train.py data.path=/data/imagenet model.name=resnet50", None),
    ("python train.py --monkey-patch --keys a,b --primary-keyboard", None),
    ("deepspeed train.py --deepspeed ds_config.json --zero-stage 2", None),
    ("python eval.py --prompt 'the token count matters'", None),
]


@pytest.mark.parametrize("given, expected", CASES, ids=[c[0][:60] for c in CASES])
def test_redaction(given, expected):
    args = shlex.split(given)
    want = shlex.split(expected) if expected is not None else args
    assert redact_args(args) == want


def test_the_table_is_real_and_both_ways():
    secret = [c for c in CASES if c[1] is not None and c[1] != c[0]]
    alone = [c for c in CASES if c[1] is None or c[1] == c[0]]
    assert len(CASES) >= 40 and len(secret) >= 20 and len(alone) >= 15
    for given, expected in secret:
        assert REDACTED in expected and REDACTED not in given
