# check_readme_example.cmake: README.md's C example (its first ```c block)
# is what a user copies, so it must build as written: it is cut out to OUT
# and compiled alone against the public headers, warnings as errors.
# cmake -DREADME=... -DOUT=... -DCC=... -DINCLUDE=... -P this file.
file(READ ${README} text)
string(FIND "${text}" "```c\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${README}: no ```c block")
endif()
math(EXPR start "${start} + 5")
string(SUBSTRING "${text}" ${start} -1 rest)
string(FIND "${rest}" "```" end)
if(end EQUAL -1)
  message(FATAL_ERROR "${README}: the ```c block does not end")
endif()
string(SUBSTRING "${rest}" 0 ${end} example)
file(WRITE ${OUT} "${example}")
execute_process(
  COMMAND ${CC} -std=gnu11 -Wall -Wextra -Werror -Wstrict-prototypes -I${INCLUDE}
          -c ${OUT} -o ${OUT}.o
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README.md's C example (as ${OUT}) does not compile:\n${out}")
endif()
message(STATUS "README.md's C example compiles (${OUT})")
