# Which libpython rlhf embeds (included from CMakeLists.txt when RLHF_PYTHON is AUTO or ON).
#
# Users' reward functions and transforms import what their own interpreter imports: the stdlib
# and the compiled modules (lib-dynload, site-packages) of the Python they run, often an
# activated venv/conda/pyenv/uv environment. Those only load into the libpython they were built
# for (a pyenv 3.11.7 `_ssl` module in Debian's libpython 3.11.2 fails with `undefined symbol:
# _PyModule_Add`). So the python3 on PATH at configure time is preferred, when it has a shared
# libpython and its headers; otherwise (a static-only build) the system's libpython
# (libpython3-dev) is used.
# -DPython3_EXECUTABLE=... picks another interpreter.
#
# Sets Python3_FOUND (and FindPython's variables) and RLHF_PYTHON_HOME: the installation prefix
# that owns the libpython (where its lib/pythonX.Y/os.py lives), compiled into py_embed.c so that
# the embedded interpreter always takes the stdlib of its own libpython, whatever python3 comes
# first on PATH at run time.
if(NOT Python3_EXECUTABLE)
  find_program(RLHF_ACTIVE_PYTHON3 NAMES python3 NO_CACHE)
  if(RLHF_ACTIVE_PYTHON3)
    execute_process(
      COMMAND "${RLHF_ACTIVE_PYTHON3}" -c
              "import os, sys, sysconfig; print(int(bool(sysconfig.get_config_var('Py_ENABLE_SHARED')) and os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))), sys.executable, sep=';', end='')"
      OUTPUT_VARIABLE rlhf_active_python RESULT_VARIABLE rlhf_active_python_rc ERROR_QUIET)
    if(rlhf_active_python_rc EQUAL 0)
      list(GET rlhf_active_python 0 rlhf_active_python_shared)
      list(GET rlhf_active_python 1 rlhf_active_python_exe)
      if(rlhf_active_python_shared)
        set(Python3_EXECUTABLE "${rlhf_active_python_exe}")
      else()
        message(STATUS "Python: ${rlhf_active_python_exe} has no shared libpython (or no "
                       "Python.h); embedding the system's (libpython3-dev)")
      endif()
    endif()
  endif()
endif()

if(Python3_EXECUTABLE)
  set(rlhf_python_components Interpreter Development.Embed)
else()
  set(rlhf_python_components Development.Embed)
endif()
if(RLHF_PYTHON STREQUAL "ON")
  find_package(Python3 REQUIRED COMPONENTS ${rlhf_python_components})
else()
  find_package(Python3 COMPONENTS ${rlhf_python_components})
endif()

# The prefix owning the library: the first directory above it holding lib/pythonX.Y/os.py
# (/usr for Debian's /usr/lib/x86_64-linux-gnu/libpython3.11.so, the version's directory for
# pyenv, the environment for conda).
set(RLHF_PYTHON_HOME "")
if(Python3_FOUND)
  list(GET Python3_LIBRARIES 0 rlhf_libpython)
  get_filename_component(rlhf_dir "${rlhf_libpython}" DIRECTORY)
  set(rlhf_stdlib "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/os.py")
  while(rlhf_dir AND NOT rlhf_dir STREQUAL "/")
    if(EXISTS "${rlhf_dir}/${rlhf_stdlib}")
      set(RLHF_PYTHON_HOME "${rlhf_dir}")
      break()
    endif()
    get_filename_component(rlhf_dir "${rlhf_dir}" DIRECTORY)
  endwhile()
  if(NOT RLHF_PYTHON_HOME)
    message(STATUS "Python: no ${rlhf_stdlib} above ${rlhf_libpython}; libpython finds its own")
  endif()
endif()
