# The fuzz target bodies: linked into the libFuzzer binaries (fuzz/CMakeLists.txt, RLHF_FUZZ=ON)
# and into tests/test_fuzz_regressions in every build.
set(RLHF_FUZZ_BODIES
  ${CMAKE_CURRENT_LIST_DIR}/targets.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_util.c
  ${CMAKE_CURRENT_LIST_DIR}/target_json.c ${CMAKE_CURRENT_LIST_DIR}/target_tokenizer.c
  ${CMAKE_CURRENT_LIST_DIR}/target_chat_template.c ${CMAKE_CURRENT_LIST_DIR}/target_files.c)
