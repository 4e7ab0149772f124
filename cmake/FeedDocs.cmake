# The docs' tables generated from the code (issue 34 item 6): feedd prints
# its config keys, metrics and pipeline ops (--list-config-keys,
# --list-metrics, --list-ops), and scripts/gen-docs writes them into the
# marked regions of README.md, daemon/README.md and the man pages.
#   cmake --build build --target docs   rewrites the regions (commit them);
#   ctest -R docs_generated             fails when a committed region differs,
#                                       naming the file, the table and the line.
set(FEED_GEN_DOCS ${CMAKE_SOURCE_DIR}/scripts/gen-docs)
add_custom_target(docs
  COMMAND ${FEED_PYTHON} ${FEED_GEN_DOCS} $<TARGET_FILE_DIR:feedd>
  DEPENDS feedd
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
  COMMENT "Writing the generated tables into README.md, daemon/README.md and man/"
  VERBATIM)
add_test(NAME docs_generated
  COMMAND ${FEED_PYTHON} ${FEED_GEN_DOCS} --check $<TARGET_FILE_DIR:feedd>)
set_tests_properties(docs_generated PROPERTIES TIMEOUT 60 LABELS docs)
