# Tests of base/ (the floor): the fatal report every CUDA/cuDNN/cuBLAS/NCCL
# check ends in, the environment switches' rule (flags_env_on), the default host allocator and
# base/file.h (mkdir -p and its undoing, regular files opened without waiting).
tower_add_test(NAME test_base_check SOURCES test_base_check.c LIBS tower_base Threads::Threads)
tower_add_test(NAME test_base_flags SOURCES test_base_flags.c LIBS tower_base)
tower_add_test(NAME test_base_host_alloc SOURCES test_base_host_alloc.c LIBS tower_base)
tower_add_test(NAME test_base_file SOURCES test_base_file.c LIBS tower_base)
