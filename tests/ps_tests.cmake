# ps/ tests: optimizer, schedule and moving average against hand arithmetic;
# averaging order and determinism; checkpoints (round trip, crash safety,
# corruption, mismatches, retention).
tower_add_test(NAME test_ps_optimizer SOURCES test_ps_optimizer.c LIBS tower_ps)
tower_add_test(NAME test_ps_average SOURCES test_ps_average.c LIBS tower_ps)
tower_add_test(NAME test_ps_checkpoint SOURCES test_ps_checkpoint.c LIBS tower_ps)
