# deploy/'s fleet layer (issue 32): the Prometheus alert rules and their
# unit tests (promtool), and the Kubernetes manifests (schemas, the
# kustomization rendered). The Grafana dashboard is checked against a live
# feedd by tests/python/test_grafana_dashboard.py.
add_test(NAME prometheus_rules
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deploy/check_prometheus_rules.sh
                 ${CMAKE_SOURCE_DIR}/deploy/prometheus)
set_tests_properties(prometheus_rules PROPERTIES TIMEOUT 120 LABELS integration)
