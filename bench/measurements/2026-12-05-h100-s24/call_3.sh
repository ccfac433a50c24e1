#!/bin/bash
# Device call 3 (session 24): session 23's plan_next_1.sh without its delivered part (call 1 had
# measured it), with 560 s for the two time-to-video runs and 120 s per child: background warm-up,
# main against branch s20-background-graphs (its diff applied as .carry/bg.patch for "branch").
sed -e 's/330 - \$(date +%s) + START/560 - $(date +%s) + START/' -e 's/--child-timeout 90/--child-timeout 120/' \
    bench/measurements/2026-12-05-h200-s23/plan_next_1.sh | sed '/bench_delivered/,$d' > /tmp/p1.sh
exec bash /tmp/p1.sh
