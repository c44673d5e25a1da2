import Capture
print("not yet")
