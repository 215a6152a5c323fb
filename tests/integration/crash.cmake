# crash.cmake: tests of one area, included from CMakeLists.txt.
