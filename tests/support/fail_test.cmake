# The command of a test that cannot run in this build (meshtrain_add_failing_test): prints
# why and how to fix it, and fails, so that CTest reports a failure instead of a pass or
# nothing at all. Usage: cmake -DWHY=<sentence> -P fail_test.cmake
message(FATAL_ERROR "${WHY}")
