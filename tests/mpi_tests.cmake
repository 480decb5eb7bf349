# Tests of training across MPI ranks (docs/hosts.md), label `mpi`: several
# ranks on loopback against one process with the same global batch, resume,
# and a killed rank.  Skipped (77) where mpirun is missing or this build has
# no MPI.
add_test(NAME test_mpi_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_train.sh $<TARGET_FILE:tower>)
set_tests_properties(test_mpi_train PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)

# --variable_update parameter_server across ranks (train/mode_ps_mpi.c):
# 1, 2 and 4 ranks against one process, both networks on synthetic data,
# sgd, momentum and adam, checkpoint + resume, the placement log.
add_executable(test_mpi_ps_helper test_mpi_ps_helper.c)
target_link_libraries(test_mpi_ps_helper PRIVATE tower_train m)
add_test(NAME test_mpi_ps COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_ps.sh $<TARGET_FILE:test_mpi_ps_helper>)
set_tests_properties(test_mpi_ps PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 900)
# --ps_dedicated (train/mode_ps_mpi.c): the first N ranks only serve; 1 server + 2 workers, 2 + 2 and 1 + 3
# bitwise one process of the workers' towers, 2 + 2 x 2 towers bitwise co-located 2 x 2, checkpoint + resume
# across layouts, each rank's memory its own part, the input split by worker, refusals, a killed server rank.
add_test(NAME test_mpi_ps_dedicated COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_ps_dedicated.sh
  $<TARGET_FILE:test_mpi_ps_helper> $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_ps_dedicated PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 900)
# mobilenet_v2's batch norm statistics across ranks: 2 ranks x 1 tower = 1 process x 2 towers, byte for byte.
add_test(NAME test_mobilenet_mpi
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mobilenet_mpi.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_mobilenet_mpi PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 300)
# `mpirun -np 2 tower bench --modes ps_mpi,replicated_mpi`: sane rows (the ranks dimension, ping-pong, MPI parts).
add_test(NAME test_bench_ranks COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_ranks.sh $<TARGET_FILE:tower>)
set_tests_properties(test_bench_ranks PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;bench" TIMEOUT 600)

# --batch_norm sync across ranks (base/ranks.h's ranks_sum_ordered through tower/tower.c's sum_across): the job
# equals one tower of the whole batch, a failing rank ends the step everywhere, the trainer's checkpoint is one
# process's of 2 towers byte for byte.
add_executable(test_mpi_sync_bn_helper test_mpi_sync_bn_helper.c)
target_link_libraries(test_mpi_sync_bn_helper PRIVATE tower_towers tower_base m)
add_test(NAME test_mpi_sync_bn COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_sync_bn.sh $<TARGET_FILE:tower>
  $<TARGET_FILE:test_imagefolder> $<TARGET_FILE:test_mpi_sync_bn_helper>)
set_tests_properties(test_mpi_sync_bn PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)

# ps_mpi's checkpoints written by the shards' owners (ps/checkpoint.h's ckpt_save_shard, ckpt_commit_shards) under
# kill -9 of a rank, inside saves and at random: the index always names a checkpoint whose shards all load, and
# the runs resume from it (and one process does, at the end).
add_test(NAME test_mpi_ckpt_kill COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_ckpt_kill.sh $<TARGET_FILE:tower>
  $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_ckpt_kill PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train;fault" TIMEOUT 600)

# --input_split files|records: each rank reads its own part of the TFRecord data (disjoint, together all of it),
# and 2 ranks still learn; none: every rank reads everything.
add_executable(test_mpi_input_split_helper test_mpi_input_split_helper.c)
target_link_libraries(test_mpi_input_split_helper PRIVATE tower_train m)
add_test(NAME test_mpi_input_split COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_input_split.sh $<TARGET_FILE:tower>
  $<TARGET_FILE:test_fault_helper> $<TARGET_FILE:test_mpi_input_split_helper> $<TARGET_FILE:test_imagefolder>)
set_tests_properties(test_mpi_input_split PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)
# --sync_replicas false (train/mode_ps_async.c): one worker bitwise ps_mpi,
# Fashion-MNIST at 4 ranks within 2 points of synchronous, staleness within
# its bound, --max_staleness 0 lockstep, bad flags, resume, a killed rank.
# RUN_SERIAL: how stale the workers' pulls get depends on what else shares
# the cores.  Beside another test under ctest -j2, async scored 0.803
# against sync's 0.826 (staleness max 11) and failed a 2-point check in CI;
# alone it did too (0.804, max 17, 2026-11-26).  2 of 23 runs here ended
# near 0.805 (both beside other work), so the check allows 3.5 points (the
# test's header).
add_test(NAME test_mpi_async
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_mpi_ps_helper>
          $<TARGET_FILE:test_events>)
set_tests_properties(test_mpi_async PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 900 RUN_SERIAL TRUE)
# --sync_replicas false with batch norm (--batch_norm tower): one worker bitwise ps_mpi on resnet20 (moving
# statistics included), --batch_norm sync refused, 2 ranks of resnet20 on Fashion-MNIST: the owners' moving
# statistics moved and finite, and eval of the checkpoint well above chance.
add_test(NAME test_mpi_async_bn
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async_bn.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_mpi_ps_helper>)
set_tests_properties(test_mpi_async_bn PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train" TIMEOUT 600)
# --sync_replicas false --save_every 0: SIGINT to mpirun, SIGTERM to one rank (a server or not): every rank
# stops after the same worker step within 10 s, and that step's checkpoint is the latest and loads.
add_test(NAME test_mpi_async_stop
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async_stop.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_async_stop PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train;fault" TIMEOUT 300)
# --ps_dedicated --sync_replicas false: 1 server + 1 worker bitwise ps_mpi's one worker, resnet20's moving
# statistics on 1 + 2, runs of 1 + 2 and 2 + 2 to the end (saves, staleness bound, the epoch's end), --resume
# across layouts, a stop by signal with rank 0 a server, a killed server-only rank.
add_test(NAME test_mpi_async_dedicated
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async_dedicated.sh $<TARGET_FILE:tower>
  $<TARGET_FILE:test_mpi_ps_helper> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_async_dedicated PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train;fault" TIMEOUT 600)
# --ps_dedicated --sync_replicas false with --input_split files and records over parts of unequal length: each
# worker runs to its own part's end, the job to the last one's; the saves after a part ended, the final
# checkpoint's global_step (every worker step), a stop by signal after a part ended, --max_steps.
add_test(NAME test_mpi_async_split
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async_split.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_async_split PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train;fault" TIMEOUT 600)
# --sync_replicas false with --input_split files and records on co-located ranks: each worker runs to its own
# part's end (2 and 3 ranks, --max_steps), the checkpoints' counts (global_step, examples, each part's own);
# --resume skips each part's own count exactly (co-located and into --ps_dedicated), an older checkpoint
# without the parts' counts and another split the examples / W each.
add_test(NAME test_mpi_async_parts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_mpi_async_parts.sh $<TARGET_FILE:tower> $<TARGET_FILE:test_fault_helper>)
set_tests_properties(test_mpi_async_parts PROPERTIES SKIP_RETURN_CODE 77 LABELS "mpi;train;fault" TIMEOUT 600)
