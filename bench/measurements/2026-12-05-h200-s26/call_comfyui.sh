#!/bin/bash
# Session 26: session 25's plan_next_comfyui.sh (time to video in a real ComfyUI, main's pack beside
# the precompiled-step branch's, two relaunches each) with the wait for the branch's detached
# builders capped at 150 s. Carry [".whl", ".carry"] (see that plan's header).
sed 's/--repeats 2 /--repeats 2 --builder-timeout 150 /' bench/measurements/2026-12-05-cpu-s25/plan_next_comfyui.sh | bash
