# daemon/core.cmake: feed_core, the pure computational core of streams:
# order and partition (order.c), pipeline parsing and planning
# (pipeline.c), per-sample augmentation (augment.c), the Philox generator
# (philox.h). No libuv, no sockets: the daemon and unit tests link it.
# Included from the top-level CMakeLists.txt, so paths are spelled out.
set(FEED_CORE_DIR ${CMAKE_SOURCE_DIR}/daemon)
add_library(feed_core STATIC
  ${FEED_CORE_DIR}/order.c
  ${FEED_CORE_DIR}/pipeline.c
  ${FEED_CORE_DIR}/augment.c)
target_include_directories(feed_core PUBLIC ${FEED_CORE_DIR})
target_link_libraries(feed_core PUBLIC feed_format m PRIVATE PkgConfig::XXHASH)
# resize reproduces torch's float operations one by one (explicit fmaf):
# the compiler must not contract others.
set_source_files_properties(${FEED_CORE_DIR}/augment.c PROPERTIES
  COMPILE_OPTIONS -ffp-contract=off)
