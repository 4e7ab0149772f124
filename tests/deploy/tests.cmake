# deploy/'s fleet layer (issue 32): the Prometheus alert rules and their
# unit tests (promtool), and the Kubernetes manifests (schemas, the
# kustomization rendered). The Grafana dashboard is checked against a live
# feedd by tests/python/test_grafana_dashboard.py.
add_test(NAME prometheus_rules
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_prometheus_rules.sh
                 ${CMAKE_SOURCE_DIR}/deploy/prometheus)
set_tests_properties(prometheus_rules PROPERTIES TIMEOUT 120 LABELS deploy)
# kubernetes-validate comes from PyPI (a venv in the build tree): without
# PyPI the test says why and is skipped (exit 77).
add_test(NAME kubernetes_manifests
         COMMAND ${FEED_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_kubernetes.py
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(kubernetes_manifests PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     LABELS deploy)
