# Writes a C file holding every src/chat/templates/*.jinja as a NUL-terminated byte array,
# with a name -> text table (see chat_template_builtin() in src/chat/chat_template.h).
# Usage: cmake -DTEMPLATE_DIR=<dir> -DOUTPUT=<file.c> -P embed_chat_templates.cmake
file(GLOB templates "${TEMPLATE_DIR}/*.jinja")
list(SORT templates)
set(arrays "")
set(names "")
set(texts "")
foreach(path IN LISTS templates)
  get_filename_component(name "${path}" NAME_WE)
  file(READ "${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND arrays "static const char template_${name}[] = {${bytes}0x00};\n")
  string(APPEND names "    \"${name}\",\n")
  string(APPEND texts "    template_${name},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp"
  "/* Generated from the .jinja files in src/chat/templates by cmake/embed_chat_templates.cmake. */\n"
  "#include <stddef.h>\n\n"
  "${arrays}\n"
  "const char *const chat_builtin_template_names[] = {\n${names}    NULL,\n};\n"
  "const char *const chat_builtin_template_texts[] = {\n${texts}    NULL,\n};\n")
configure_file("${OUTPUT}.tmp" "${OUTPUT}" COPYONLY)
file(REMOVE "${OUTPUT}.tmp")
