#!/usr/bin/env bash
# A stacked weight's gradient kept as one buffer (0f764b0; LEANTRAIN_GRADIENT_PARTS=1 on BUILD's
# runs): bench/issue46_call22.sh's checks with the GPU tests around the change (GradientParts.*,
# the rotary tests, the fused step, kept casts, the LLaMA-family, MoE and SwiGLU tests), TinyLlama
# beside OLD (db2b651's leantrain), the CUPTI timeline of the default step (the gradient copies
# gone), GPT-2 train beside its plan, and the plan sweep, seed 8 (40 configurations: the device
# time left was short). Not run yet.
#   BUILD=build-gpu OLD=build-old OUT=$OUT bash bench/issue46_call23.sh
UNIT_FILTER='GradientParts*:RopeVec*:RopePositions*:FusedStep*:KeptCasts*:Llama*:*MoeCuda*:SwigluActivation*:Gemma*:Qwen*:*F32WeightGrads*' \
  SWEEP_SEED=8 SWEEP_N=40 NEW_ENV=LEANTRAIN_GRADIENT_PARTS=1 CALL=call23 exec bash "$(dirname "$0")/issue46_call22.sh"
