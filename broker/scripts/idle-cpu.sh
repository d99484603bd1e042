#!/bin/bash
# Usage: broker/scripts/idle-cpu.sh [broker run options, e.g. --config FILE]
# Idle broker CPU: run it for 10 s with nothing attached; utime+stime from /proc/<pid>/stat
# (clock ticks) and on-CPU nanoseconds from /proc/<pid>/schedstat (all threads: task dir sum).
ns=idlecpu-$$; bin=${BROKER:-target/release/broker}   # run from the workspace root after `cargo build --release -p shmring-broker`
$bin run --namespace $ns "$@" 2>/dev/null & pid=$!
sleep 1
cpu_ns() { cat /proc/$pid/task/*/schedstat | awk '{s+=$1} END {print s}'; }
a=$(awk '{print $14+$15}' /proc/$pid/stat); an=$(cpu_ns)
sleep 10
b=$(awk '{print $14+$15}' /proc/$pid/stat); bn=$(cpu_ns)
kill $pid; wait $pid 2>/dev/null; rm -rf /dev/shm/shmring.$ns
tck=$(getconf CLK_TCK)
echo "$bin $*: utime+stime $((b-a)) ticks (1/$tck s) in 10 s; on-CPU $(( (bn-an)/1000 )) us in 10 s = $(echo "scale=4; ($bn-$an)/100000000" | bc)% of a core"
