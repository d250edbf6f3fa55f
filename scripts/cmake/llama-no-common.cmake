# Included right after llama.cpp's project() (CMAKE_PROJECT_llama.cpp_INCLUDE, set by scripts/bootstrap.sh).
# llama-cpp-python forces LLAMA_BUILD_COMMON=ON in the cache, but its Python package loads only libllama
# and libggml*: the common library (chat templates, argument parsing; a third of the compile) is never
# used. A normal variable shadows the cached one in llama.cpp's directory, so common is neither built
# nor installed.
set(LLAMA_BUILD_COMMON OFF)
